"""The chapters' experiment code: small models, tasks and measurements that teach, one module per chapter
experiment. Nothing in the core library (``companion.attention``, ``companion.model``, ...) imports from here;
these modules build on the core. ``import companion`` does not load them.
"""
