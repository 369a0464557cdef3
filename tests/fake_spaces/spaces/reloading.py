"""Gradio starts a Space's hot-reload server from here (``spaces.reloading``); the stand-in reloads nothing:
its thread waits for the server to stop."""


def start_reload_server(prerun, postrun, stop_event, port: int = 7887) -> None:
    stop_event.wait()
