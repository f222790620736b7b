"""Offline replacement for the get-pip bootstrap script that ansible-test downloads.

ansible-test runs the cached script as `python get_pip.py [pip options] pip==X pkg==Y ...` inside a
fresh virtual environment. The download host is not reachable from every CI machine, so this
script installs pip from the interpreter's bundled wheel (ensurepip, no network) and then installs
the requested packages from the configured package index.
"""
import subprocess
import sys

requested = [arg for arg in sys.argv[1:] if arg not in ('--no-setuptools', '--no-wheel')]
subprocess.check_call([sys.executable, '-m', 'ensurepip', '--default-pip'], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, '-m', 'pip', 'install', '--quiet', '--upgrade'] + requested)
