"""The input parts of tasks: what an example reads (an image, a text, a pair of texts)."""
