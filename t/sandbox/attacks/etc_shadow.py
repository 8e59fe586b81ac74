# Host secrets: there is no /etc in the jail.
open("/etc/shadow").read()
