"""The status page's probes: their results, the collector that feeds the page, the page check."""
