"""TiCDC's Open API v2 over HTTP: the server (`server`) and the client the CLI uses (`client`)."""
