"""
The factorial study: which axis carries XSA's gain at CPU scale (training steps, tokens per parameter
or model size), with both arms at two common matrix learning rates.

- design.py:   the study as data (its cells, rates, seeds, contrasts and rules).
- analysis.py: its registered estimates, read from run records (cells, contrasts, stability).
- models.py:   the comparison of the length parameterisations and the conditional d12 numbers.
- prereg.py:   its registration text (python -m xsa.prereg --study factorial).

Its estimates as the paper reads them are written by xsa/books/factorial.py.
"""
