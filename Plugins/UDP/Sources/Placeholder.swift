// UDP
