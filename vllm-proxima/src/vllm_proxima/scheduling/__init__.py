"""The proxima scheduler (upstream's, with projected-peak admission) and its policies."""
