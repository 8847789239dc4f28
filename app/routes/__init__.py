"""One module per HTTP resource."""
