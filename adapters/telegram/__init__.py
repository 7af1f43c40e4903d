"""Telegram through aiogram 3: long polling of our own or a webhook (see docs/telegram.md)."""

from adapters.telegram.adapter import TelegramAdapter, create_adapter

__all__ = ["TelegramAdapter", "create_adapter"]
