"""The ops dashboard on the orchestrator's HTTP port: the page at `/` (static/), its JSON at
`/api/...` (api.py), fed by the requests this orchestrator saw end (recorder.py → history.py)."""
