"""Quality numbers and what produces them: metrics from logits, scorers per format, the reference model's outputs.

Below the passes and the exporters (they measure with it); evaluation sits above them."""
