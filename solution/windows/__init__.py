"""From an example to the model's input: the featurizer cuts a page into `[CLS] question [SEP] slice [SEP]`
windows with labels, the dataset caches labelled windows on disk, and sampling decides which
windows without an answer training keeps.

Separate because training and inference read the same windows: one place decides what the model sees.
"""
