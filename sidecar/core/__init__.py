"""The pure request core, the same for every wire API: stream events, the bookkeeping of
an upstream attempt, request planning, the reissue ladder, the exchange's books and the
body helpers. No I/O and no clock reads: time is passed in."""
