"""The served model's tokenizer over HTTP (/tokenize, /detokenize, /tokenizer_info), in llama-server's and
vLLM's shapes: what lm-evaluation-harness's remote tokenizer uses."""

from edgeopt.server.face import Face
from edgeopt.server.tokenize import routes

FACE = Face("tokenize", routers={"causal-lm": (routes.router,)})
