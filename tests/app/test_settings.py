"""``Settings``: the decision model's environment names, and a bad value as one line naming it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import InvalidSettings, Settings


def test_the_decision_model_is_read_from_its_name_and_its_first_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().decision_model == "auto"
    monkeypatch.setenv("PDROUTE_MODEL", "design")  # the variable's first name still works
    assert Settings().decision_model == "design"
    monkeypatch.setenv("PDROUTE_DECISION_MODEL", "queue-aware")  # and the new name wins
    assert Settings().decision_model == "queue-aware"
    assert Settings(decision_model="design").decision_model == "design"  # in code, by the field's name


@pytest.mark.parametrize("variable", ["PDROUTE_DECISION_MODEL", "PDROUTE_MODEL"])
def test_a_bad_decision_model_names_both_of_its_variables(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "bogus")
    with pytest.raises(ValidationError) as caught:
        Settings()
    message = str(InvalidSettings.of(caught.value))
    assert message.startswith("PDROUTE_DECISION_MODEL (or PDROUTE_MODEL): "), message
    assert "'bogus'" in message and message.count("\n") == 0, message
