"""The guarantee: knobs (validated data), the plan, the one undo mechanism, blocks and their owners,
the one interception of Inductor's compile with its attestation, the one compile-event channel, the
SM gate, environment activation.
"""
