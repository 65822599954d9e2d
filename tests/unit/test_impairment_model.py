"""Impairment profiles: validation messages, built-in profiles, user files, purity of the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Direction, Impairment, builtin_names, load_impairment

BUILTINS = {"none", "wifi-good", "wifi-congested", "lossy-1pct", "lossy-5pct", "narrowband-250kbit"}


def _write(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_six_builtin_profiles_ship_and_load() -> None:
    assert set(builtin_names()) == BUILTINS
    for name in BUILTINS:
        assert load_impairment(name).name == name


@pytest.mark.parametrize(
    ("name", "netem"),
    [("none", False), ("lossy-1pct", False), ("lossy-5pct", False), ("narrowband-250kbit", False),
     ("wifi-good", True), ("wifi-congested", True)],
)
def test_needs_netem_only_for_delay_jitter_or_correlation(name: str, netem: bool) -> None:
    assert load_impairment(name).needs_netem is netem


def test_builtin_values_match_their_names() -> None:
    assert load_impairment("lossy-5pct").loss_pct == 5
    assert load_impairment("lossy-1pct").loss_pct == 1
    assert load_impairment("narrowband-250kbit").rate_kbit == 250
    assert load_impairment("none").is_noop


def test_loss_150_percent_is_refused_naming_file_line_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "description: too lossy\nloss_pct: 150\n")
    with pytest.raises(TestbedError) as err:
        load_impairment(path)
    assert str(path) in err.value.message
    assert f"{path}:2: loss_pct: must be a percentage between 0 and 100 (got 150" in err.value.evidence


def test_negative_delay_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "delay_ms: -5\n")
    with pytest.raises(TestbedError) as err:
        load_impairment(path)
    assert f"{path}:1: delay_ms: must not be negative (got -5" in err.value.evidence


def test_rate_zero_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "loss_pct: 1\nrate_kbit: 0\n")
    with pytest.raises(TestbedError) as err:
        load_impairment(path)
    assert f"{path}:2: rate_kbit: must be > 0 kbit/s when set (got 0)" in err.value.evidence


def test_jitter_larger_than_delay_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "delay_ms: 5\njitter_ms: 8\n")
    with pytest.raises(TestbedError) as err:
        load_impairment(path)
    assert "jitter_ms: must not exceed delay_ms (8.0 ms > 5.0 ms)" in err.value.evidence


def test_correlation_without_loss_and_unknown_keys_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "loss_correlation_pct: 25\nlatency: 3\n")
    with pytest.raises(TestbedError) as err:
        load_impairment(path)
    assert "loss_correlation_pct: needs loss_pct > 0" in err.value.evidence
    assert f"{path}:2: latency: unknown key" in err.value.evidence


def test_bad_direction_and_distribution_are_refused() -> None:
    with pytest.raises(ValidationError) as err:
        Impairment(name="x", direction="subscriber->broker", distribution="gauss")  # type: ignore[arg-type]
    fields = {e["loc"][0] for e in err.value.errors()}
    assert fields == {"direction", "distribution"}


def test_unknown_name_lists_the_known_profiles() -> None:
    with pytest.raises(TestbedError) as err:
        load_impairment("lossy-50pct")
    assert "unknown impairment profile: 'lossy-50pct'" in err.value.message
    for name in BUILTINS:
        assert name in (err.value.hint or "")


def test_broken_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "loss_pct: 5\ndelay_ms: [1,\n")
    with pytest.raises(TestbedError) as err:
        load_impairment(path)
    assert err.value.message.startswith(f"{path}:")
    assert "invalid YAML" in err.value.message


def test_missing_user_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="impairment profile file not found"):
        load_impairment(tmp_path / "nope.yaml")


def test_user_profile_takes_its_name_from_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "loss_pct: 2.5\ndirection: both\n", name="Lab Link.yaml")
    imp = load_impairment(path)
    assert imp.name == "lab-link"
    assert imp.direction is Direction.BOTH
    assert imp.direction.covers(Direction.BROKER_TO_SUBSCRIBER)
    assert not imp.needs_netem


def test_loss_resolution_is_a_hundredth_of_a_percent() -> None:
    with pytest.raises(ValidationError, match="at most 2 decimal places"):
        Impairment(name="x", loss_pct=0.125)
