"""Real-data preparation for vrgd_tf (TFRecords in TF Model Garden formats)."""
