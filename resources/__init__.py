# Data shipped with Hookscope (sample photographs, colormaps, icons). Installed as the package `hookscope.resources`.
