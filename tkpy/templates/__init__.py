"""Block templates: the author writes load / compute / finish; the template owns the pipeline."""
from .lcf import LCF, Task, lcf, shared
