"""Source text that makes a Python process refuse to import torch (and torchvision): the prefix of the
driver processes the tests start, to check that the Ray driver never imports torch (3-5 s).

An import hook, not `sys.modules['torch'] = None`: scipy (used by the report's intervals) checks
`sys.modules` for torch to recognise tensors, and finds the None there instead of no entry.
"""
BLOCK_TORCH = ("import sys\n"
               "class _NoTorch:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
               "            raise ImportError(f'{name} imported in the driver, which must not import torch')\n"
               "sys.meta_path.insert(0, _NoTorch())\n")
