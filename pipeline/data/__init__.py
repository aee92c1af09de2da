"""Data: TFRecords, image folders and tables, each kind's splits as tf.data datasets,
augmentation, and the embedded offline datasets."""
