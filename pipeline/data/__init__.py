"""Data: TFRecords, tf.data datasets, augmentation and the embedded offline dataset."""
