"""`sampling_seed` reaches the config from a YAML section, a flat YAML key and the command line, and a bad
value is an error naming it; the run's own seed stays the run's."""

import pytest

from solution.training.config import load_config


@pytest.mark.parametrize("text,overrides", [
    ("seed: 1\nsampling:\n  sampling_seed: 0\n", []),
    ("seed: 1\nsampling_seed: 0\n", []),  # a flat key, as configs give negative_keep_rate
    ("seed: 1\n", ["--sampling_seed", "0"]),
    ("seed: 1\nsampling:\n  sampling_seed: 4\n", ["--sampling_seed=0"]),  # the command line wins
])
def test_sampling_seed_loads(tmp_path, text, overrides):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    cfg = load_config(str(path), overrides)
    assert cfg.seed == 1 and cfg.sampling.sampling_seed == 0 and cfg.sampling.draw_seed(cfg.seed) == 0
    assert "sampling_seed: 0" in cfg.to_yaml()  # config.yaml in the run folder records it


def test_default_is_the_run_seed():
    cfg = load_config(None, ["--seed", "3"])
    assert cfg.sampling.sampling_seed is None and cfg.sampling.draw_seed(cfg.seed) == 3


@pytest.mark.parametrize("overrides,message", [
    (["--sampling_seed", "-1"], "sampling.sampling_seed must be an integer >= 0 or null, got -1"),
    (["--sampling_seed", "1.5"], "sampling_seed expects int or null, got '1.5'"),
    (["--sampling_seed", "first"], "sampling_seed expects int or null, got 'first'"),
])
def test_a_bad_sampling_seed_names_the_field(overrides, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        load_config(None, overrides)


def test_a_bad_yaml_sampling_seed_names_the_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  sampling_seed: 0.5\n")
    with pytest.raises(ValueError, match=r"sampling\.sampling_seed expects int or null, got 0\.5"):
        load_config(str(path))


def test_the_run_seeds_spelling_in_the_section_points_at_the_setting(tmp_path):
    # `seed` is the run's (one plain name per setting on the command line), so the section's is sampling_seed.
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  seed: 0\n")
    with pytest.raises(ValueError, match=r"unknown config key 'sampling\.seed' \(did you mean 'sampling_seed'\?\)"):
        load_config(str(path))
