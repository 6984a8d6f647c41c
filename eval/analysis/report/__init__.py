"""``pra report``: tables and figures regenerated from saved run folders only (no model runs)."""
