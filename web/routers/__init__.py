"""One APIRouter per resource: runs, timeline, jobs, scenarios; and the HTML pages."""
