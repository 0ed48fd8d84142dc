"""Network I/O: the only modules that await a socket. The proxy's handlers carry out what
the pure core decides: ``proxy`` (the routes and their lifecycle), ``runner`` (a watched
exchange), ``pump`` (one attempt's read loop), ``relay`` (pass-through), ``client`` and
``sinks`` (the client's side), ``accounting`` (metrics and logs); the upstream pool, the
client sinks and the fleet's Redis move the bytes."""
