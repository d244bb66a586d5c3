"""A reward's named components travel with a share's cost. That they reach each generation's metrics (a reward file
of yours, scored in processes of its own) is checked in tests/integration/test_reward_components.py."""

from essaflow.judging.tally import ComponentTally
from essaflow.usage import Usage


def test_a_share_cost_carries_the_component_sums():
    usage = Usage(generated_tokens=7, forward_tokens=20, device_s=0.5, components=ComponentTally({"a": 3.0}, 4))
    back = Usage.decode(usage.encode())
    assert (back.generated_tokens, back.forward_tokens, back.device_s) == (7, 20, 0.5)
    assert back.components.means() == {"a": 0.75}
    assert len(Usage().encode()) == 12, "a reward without components adds nothing to what travels"
    assert "components" not in usage.as_row()
