"""Network I/O: the only modules that await a socket. The proxy handlers carry out what
the pure core decides; the upstream pool, the client sinks and the fleet's Redis move the
bytes."""
