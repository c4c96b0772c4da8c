"""The studies and their registration: the kinds a study is made of (kinds), the rules of an adaptive
study (rules), every study as data (registry: get_study), the scale study with its registered checks
and the d12 test (scale), its model (predict), and the generated registrations of the scale study and
its checks (prereg_scale, prereg_check). The command is python -m xsa.prereg."""
