"""The fingerprint step: a digest of the input data, so KFP's cache follows the data."""
