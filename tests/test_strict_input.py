"""Bad input is refused naming the field: a JSON null where None is no value of the field, a bool
where a step count goes."""

import pytest

from xsa.stack.config import ConfigError
from xsa.stack.presets import make_config
from xsa.stack.spec import parse_overrides


def test_null_for_a_field_that_takes_none_is_refused_naming_it():
    with pytest.raises(ValueError, match="matrix_lr=null"):
        parse_overrides(["matrix_lr=null"])


def test_null_for_an_optional_field_is_that_value_not_the_presets():
    cfg = make_config("cpu-w64-d4", **parse_overrides(["muon_momentum_final=null"]))
    assert make_config("cpu-w64-d4").muon_momentum_final is not None
    assert cfg.muon_momentum_final is None


@pytest.mark.parametrize("field", ["warmup_steps", "muon_momentum_warmup_steps"])
def test_a_bool_is_not_a_step_count(field):
    with pytest.raises(ConfigError, match=field):
        make_config("cpu-w64-d4", **{field: True})
