"""Campaigns: a matrix of experiments run as one queue (definition, plan).

``definition`` reads and checks a campaign file; ``plan`` expands it into points and the fewest
loads that cover them.
"""
