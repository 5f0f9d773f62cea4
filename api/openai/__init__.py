"""The OpenAI-compatible edge: protocol (models, validation) and rendering; the routes are
:mod:`api.routes.openai_compat`."""
