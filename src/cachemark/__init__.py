"""cachemark: benchmark any cache backend a web application uses."""
__version__ = "0.1.0"
