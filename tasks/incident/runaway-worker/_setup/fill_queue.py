"""Setup only: the inbox as the page found it; job 4471 (from the new upload client) sends its
size as a string, and every job behind it waits."""

import json
from pathlib import Path

inbox = Path("queue/inbox")
inbox.mkdir(parents=True, exist_ok=True)
(inbox / "job-004471.json").write_text(json.dumps(
    {"id": 4471, "image": "uploads/8f3a.jpg", "size": "1200x800", "client": "upload-v2"}))
for i in range(4472, 4512):
    (inbox / f"job-{i:06d}.json").write_text(json.dumps(
        {"id": i, "image": f"uploads/{i:x}.jpg", "size": [1600 + i % 7 * 10, 1200],
         "client": "web"}))
