"""One APIRouter per resource: runs, timeline, history, jobs, scenarios; and the HTML pages."""
