"""Side-by-side benchmarks; ``python -m bench`` runs every module's ``results()`` (see __main__)."""
