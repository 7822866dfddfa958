"""uvicorn + FastAPI noop app for benches/run: GET /noop -> {"ok": true}."""
from fastapi import FastAPI

app = FastAPI()


@app.get("/noop")
async def noop():
    return {"ok": True}
