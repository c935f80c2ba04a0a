"""A run's label in the report: what it trained, and on which action space."""

from __future__ import annotations

from ellm_tools.report.runs import method_name


def test_a_text_crafter_run_over_another_action_space_says_so():
    base = {"method": "random", "env_spec": {"name": "CrafterTextEnv-v2"}}
    assert method_name(base) == "Random actions"
    crafter = {**base, "env_spec": {**base["env_spec"], "action_space_type": "crafter"}}
    assert method_name(crafter) == "Random actions (17 actions)"
    craftax = {**crafter, "engine": "craftax", "env_spec": {"name": "Craftax-Classic-v1",
                                                            "action_space_type": "crafter"}}
    assert "17" not in method_name(craftax)
