"""The API faces this server has: one line per face (edgeopt/server/face.py says what a face brings)."""

from __future__ import annotations

from edgeopt.server.anthropic import FACE as ANTHROPIC
from edgeopt.server.face import Face
from edgeopt.server.ollama import FACE as OLLAMA
from edgeopt.server.openai import FACE as OPENAI
from edgeopt.server.rerank import FACE as RERANK
from edgeopt.server.router import FACE as ROUTER
from edgeopt.server.responses import FACE as RESPONSES
from edgeopt.server.tokenize import FACE as TOKENIZE

FACES: tuple[Face, ...] = (OPENAI, RESPONSES, ANTHROPIC, OLLAMA, TOKENIZE, RERANK, ROUTER)
