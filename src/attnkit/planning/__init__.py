"""Planning: capabilities, registry, priorities, rules, solver. Never imports torch."""
