"""Signed webhook callbacks (Standard Webhooks) with an SSRF guard."""
