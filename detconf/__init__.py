"""detconf's shared, torch-free definitions (see :mod:`detconf.vocabulary`)."""
