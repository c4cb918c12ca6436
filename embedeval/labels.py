"""The vocabulary of embedeval's tables, defined once: labels that builders, metrics and the
report all match on."""

#: ``variant`` of a needle-free haystack paired with a (group, length) condition.
CONTROL = "control"
#: ``query_form`` of the plain question (expanded forms are ``expanded-N``).
QUESTION = "question"
#: ``category`` / ``depth_bucket`` of a metric computed over every category or depth.
ALL = "all"
