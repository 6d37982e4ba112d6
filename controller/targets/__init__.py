"""What gets scaled: one module per kind of target behind the interface in `base`, and the wrappers that refuse
(`guards`: another rule or an HPA owns the target; this replica no longer leads)."""
