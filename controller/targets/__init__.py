"""What gets scaled: one module per kind of target behind the interface in `base`."""
