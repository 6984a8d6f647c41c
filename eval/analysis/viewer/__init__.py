"""Looking at a run: each question's beam search as a tree, in the terminal (``terminal``) and in a
self-contained HTML page (``page``, ``pra show``), both read from the run folder (``trees``)."""
