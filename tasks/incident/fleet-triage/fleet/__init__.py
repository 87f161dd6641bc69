"""The region's fleet, as the on-call checks it."""
