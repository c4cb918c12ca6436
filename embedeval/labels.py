"""The vocabulary of embedeval's tables, defined once: labels that builders, metrics and the
report all match on."""

#: ``variant`` of a needle-free haystack paired with a (group, length) condition.
CONTROL = "control"
#: ``query_form`` of the plain question (expanded forms are ``expanded-N``).
QUESTION = "question"
#: ``category`` / ``depth_bucket`` of a metric computed over every category or depth.
ALL = "all"
#: Columns of the similarity table (one row per embedder x haystack x query form).
SIMILARITY_COLUMNS = [
    "embedder", "haystack_id", "group_id", "category", "variant", "length", "depth", "target_depth",
    "query_form", "sim_qh", "sim_qn", "normalized", "normalized_by", "n_tokens", "truncated", "needle_visible",
]
