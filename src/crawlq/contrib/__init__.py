"""Integrations with other crawling tools (Scrapy)."""
