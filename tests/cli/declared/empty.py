"""A module that declares no channel any more."""
