"""The estimate books: every number the paper states, computed once from checked records and written
to results/estimates/<study>.json (estimates: the Estimate and its file). Each study's declared
estimates (declared), every shown effect (effects), the verdicts decided from them (verdicts), the scale
study's (scale, its check scale_check, its learned gates scale_gates), the factorial's as the paper reads
them (factorial), the archived study's records (archive), what the text states beyond the registered
estimates (paper_estimates), and the published results on XSA, typed once as data (published). Nothing here draws or lays out; xsa/report/ renders the books."""
