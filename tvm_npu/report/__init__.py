"""Reports of what ran: the per-layer report, the deployment memory, the Perfetto trace and the roofline
plot, all free functions of the runtime's plain records (and of a build's ``BuildInfo``)."""
