"""The pure core: settings, the choice model, the rules and the files. Imports only the standard
library (and python-dotenv, in ``settings``, when an env file is read)."""
