"""The kernel printers, one module per template, named as the template is (``schedules/NAME`` is
printed by ``kernels/NAME.py``); ``conv2d_img2col`` is the conv2d printer's ``Img2col`` part."""
