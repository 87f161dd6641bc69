"""The bad config push #655: SEK enabled (wanted) and the timeout cut to 300 ms (a dropped zero)."""

from pathlib import Path

conf = Path("config/gateway.toml")
text = conf.read_text()
text = text.replace("acquirer_timeout_ms = 3000", "acquirer_timeout_ms = 300")
text = text.replace('["EUR", "USD", "GBP"]', '["EUR", "USD", "GBP", "SEK"]')
conf.write_text(text)
