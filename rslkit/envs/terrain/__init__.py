"""Rough terrain for legged robots: a heightfield of tiles in rows of increasing difficulty, a torch lookup of its
heights, its MJCF form and the terrain-level curriculum (``go2-rough``).

``tiles.py`` (tile shapes), ``generator.py`` (the grid), ``height_field.py`` (heights under points),
``mjcf.py`` (the ``hfield`` in a model), ``curriculum.py`` (levels per env).
"""
